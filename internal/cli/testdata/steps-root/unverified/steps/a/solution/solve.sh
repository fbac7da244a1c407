echo done > /app/a
