#!/bin/bash
cat > /app/sum.sh <<'SH'
#!/bin/bash
awk '{s+=$1} END{print s}' /app/numbers.txt
SH
