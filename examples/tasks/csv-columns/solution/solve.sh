#!/bin/bash
cat > /app/cols.py <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
def num(v):
    try:
        float(v)
        return True
    except ValueError:
        return False
for col in rows[0].keys():
    if all(num(r[col]) for r in rows):
        print(col)
PY
