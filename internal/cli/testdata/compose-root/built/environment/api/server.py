import socketserver

GREETING = open("/greeting", "rb").read()


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(GREETING)


socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("0.0.0.0", 7001), Handler).serve_forever()
