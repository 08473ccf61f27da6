mov %r1, 3
call local f
call 5
call helper 181
call kfunc 1
lddw %r2, map_fd 0
lddw %r3, map_value 0, 4
lddw %r4, func f
callx %r4
ja32 +0
exit
f:
mov %r0, %r1
mul %r0, 4
exit
