/* emu_switch(void **save_sp, void *new_sp): save callee-saved state on this stack, store rsp in
 * *save_sp, continue on new_sp (a stack saved by emu_switch or built by emu_stack_init). */
    .text
    .globl emu_switch
    .type emu_switch,@function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch,.-emu_switch

    .globl emu_fiber_tramp
    .type emu_fiber_tramp,@function
emu_fiber_tramp:
    call emu_fiber_main
    ud2
    .size emu_fiber_tramp,.-emu_fiber_tramp
    .section .note.GNU-stack,"",@progbits
