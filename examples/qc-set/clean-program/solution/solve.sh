#!/bin/bash
cat > /app/fib.py <<'PY'
import sys
a, b = 1, 1
for _ in range(int(sys.argv[1])):
    print(a)
    a, b = b, a + b
PY
