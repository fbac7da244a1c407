import secrets, socketserver

KEY = secrets.token_hex(8).encode() + b"\n"


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(KEY)


socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("0.0.0.0", 7000), Handler).serve_forever()
