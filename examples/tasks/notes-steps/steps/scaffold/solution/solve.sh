#!/bin/bash
cp /app/template.txt /app/notes.txt
