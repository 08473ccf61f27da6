# ALU, jumps, labels
mov32 %r0, -1
mov %r1, 10
loop:
add %r0, 2
sub %r1, 1
jne %r1, 0, loop
lsh %r0, 3
arsh32 %r0, 1
be16 %r0
bswap64 %r0
movsx1632 %r2, %r0
exit
