stxdw [%r10-8], %r1
ldxdw %r0, [%r10-8]
ldxsw %r2, [%r10-8]
stw [%r10-16], 7
lock fetch add [%r10-8], %r1
lock cmpxchg [%r10-8], %r2
lock xchg32 [%r10-16], %r3
lddw %r0, 0x1122334455667788
exit
