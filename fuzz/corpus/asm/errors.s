mov %r11, 1
jne %r0, %r1, nowhere
add32 %r0,
exit
