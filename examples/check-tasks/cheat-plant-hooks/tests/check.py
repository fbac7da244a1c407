import sys
try:
    ok = open('/app/answer.txt').read().strip() == '42'
except OSError:
    ok = False
sys.exit(0 if ok else 1)
