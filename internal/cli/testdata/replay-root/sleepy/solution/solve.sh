#!/bin/bash
# Never finishes within a test: the process is killed first.
echo started
sleep 600
