echo done > /app/b
