#!/bin/bash
# A slow solve: one line every 0.15 s, about 3 s in all.
for i in $(seq 1 20); do
  echo "$i" >> /app/ticks
  sleep 0.15
done
echo done
