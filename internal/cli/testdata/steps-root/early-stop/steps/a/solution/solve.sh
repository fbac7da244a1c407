echo 0.5 > /app/score
