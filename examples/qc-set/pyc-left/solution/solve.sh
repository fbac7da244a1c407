#!/bin/bash
python3 /solution/gen_answer.py
