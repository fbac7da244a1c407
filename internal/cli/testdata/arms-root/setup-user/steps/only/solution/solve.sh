id -u > /app/solve_uid
