id -u > /app/setup_uid
