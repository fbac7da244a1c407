#!/bin/bash
# Long enough for a test to act while the cell runs.
echo started
sleep 10
echo done > /app/out.txt
