#!/bin/bash
set -e
cat > /app/answer.cpp <<'CPP'
// prints: 189
#include <fstream>
#include <iostream>
int main() {
  std::ifstream in("/app/numbers.txt");
  long sum = 0, n;
  while (in >> n) sum += n;
  std::cout << sum << "\n";
}
CPP
g++ -O2 -o /app/answer /app/answer.cpp
