echo no shebang
