#!/bin/bash
# Reserved: run in the working directory before the step's agent, then removed.
echo "set up by uid $(id -u)" > /app/.scaffold-ready
