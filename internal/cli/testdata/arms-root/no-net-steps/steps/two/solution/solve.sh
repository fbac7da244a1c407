ls /sys/class/net > /app/nets
