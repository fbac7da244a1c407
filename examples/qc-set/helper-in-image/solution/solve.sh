#!/bin/bash
echo $((6 * 7)) > /app/answer.txt
