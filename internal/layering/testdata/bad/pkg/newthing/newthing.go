package newthing

import _ "example.com/bad/pkg/events"
