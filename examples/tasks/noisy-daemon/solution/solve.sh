#!/bin/bash
# A background process that keeps stdout open, invalid UTF-8, a long line,
# and no final newline: the cell must still end promptly and keep valid text.
sleep 100000 &
printf 'caf\xe9 \xff\n'
head -c 200000 /dev/zero | tr '\0' 'x'
echo
echo yes > /app/done
printf 'no trailing newline'
