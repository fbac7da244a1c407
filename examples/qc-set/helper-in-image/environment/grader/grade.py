import sys
try:
    ok = open("/app/answer.txt").read().strip() == str(6 * 7)
except OSError:
    ok = False
sys.exit(0 if ok else 1)
