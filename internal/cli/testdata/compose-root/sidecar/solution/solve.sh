#!/bin/bash
set -e
exec 3<>"/dev/tcp/$KEY_HOST/7000"
read -r key <&3
echo "$key" > /app/answer
