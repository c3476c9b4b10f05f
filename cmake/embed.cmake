# cmake -DIN=file -DOUT=file.c -DSYM=name -P embed.cmake
# Writes a C file defining `const unsigned char SYM[]` (the bytes of IN, NUL-terminated) and
# `const unsigned long SYM_len` (the byte count without the NUL).
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUT}" "/* Generated from ${IN} by cmake/embed.cmake; do not edit. */\n"
  "const unsigned char ${SYM}[] = {\n  ${bytes}0x00};\n"
  "const unsigned long ${SYM}_len = ${len};\n")
