#!/bin/bash
printf '#!/bin/bash\nwc -w < /app/text.txt\n' > /app/count.sh
