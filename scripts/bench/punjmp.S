# The end search's code in a loop of five instructions, entered by a plain
# jmp (loop_plain: the jmp displaces two instructions, which its copy runs)
# or by a punned one (loop_punned: the jmp's last two bytes are the next
# instruction's, which the copy jumps back to). scripts/bench/endsearch.sh
# times both; punjmp.c maps the punned jmp's landing page.
	.section .wx,"awx",@progbits
	.p2align 12
	.globl loop_plain, loop_punned, head_punned
loop_plain:
	mov $0x1469598103934665, %rax
	mov $1099511628211, %rcx
	xor %edx, %edx
1:	jmp compare_plain
back_plain:
	add $1, %rdx
	cmp %rdi, %rdx
	jne 1b
	ret
loop_punned:
	mov $0x1469598103934665, %rax
	mov $1099511628211, %rcx
	xor %edx, %edx
	jmp head_punned
	.p2align 6
head_punned:
	.byte 0xe9, 0x00, 0x00          # jmp rel32, its high bytes those of the imul
after_punned:
	imul %rcx, %rax                 # 48 0f af c1
	add $1, %rdx
	cmp %rdi, %rdx
	jne head_punned
	ret

# The comparison, as replayer/endsearch.go assembles it (three registers).
.macro COMPARE
	mov %rax, data(%rip)
	lahf
	seto %al
	mov %ax, data+8(%rip)
	incq data+16(%rip)
	cmp data+24(%rip), %rsp
	jne 2f
	cmp data+32(%rip), %rcx
	jne 2f
	cmp data+40(%rip), %rdx
	jne 2f
	int3
2:	mov data+8(%rip), %ax
	add $0x7f, %al
	sahf
	mov data(%rip), %rax
.endm
	.p2align 12
	.globl compare_punned
compare_plain:
	COMPARE
	xor %rdx, %rax                  # the two displaced instructions
	imul %rcx, %rax
	jmp back_plain
compare_punned:
	COMPARE
	xor %rdx, %rax                  # the one displaced instruction
	jmp after_punned
	.p2align 12
data:	.fill 4096, 1, 0
	.section .note.GNU-stack,"",@progbits
