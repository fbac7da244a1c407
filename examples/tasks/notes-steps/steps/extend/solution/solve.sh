#!/bin/bash
echo "step two" >> /app/notes.txt
