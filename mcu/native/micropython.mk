# q15attn as a user C module baked into MicroPython firmware (the alternative to q15attn.mpy), for the make ports:
#   make -C ports/stm32 BOARD=PYBV11 USER_C_MODULES=/path/to/kbench/mcu
# USER_C_MODULES names the folder that holds this one; MicroPython includes every */micropython.mk in it.

Q15ATTN_DIR := $(USERMOD_DIR)

# The binding is scanned for qstrs; the kernel has none (pure C99, no MicroPython headers).
SRC_USERMOD_C += $(Q15ATTN_DIR)/modq15attn.c
SRC_USERMOD_LIB_C += $(Q15ATTN_DIR)/attention_q15.c
SRC_USERMOD_LIB_C += $(Q15ATTN_DIR)/attention_q15_divide.c
SRC_USERMOD_LIB_C += $(Q15ATTN_DIR)/attention_q15_stream.c
SRC_USERMOD_LIB_C += $(Q15ATTN_DIR)/attention_q15_describe.c
SRC_USERMOD_LIB_C += $(Q15ATTN_DIR)/kbench_frame.c
CFLAGS_USERMOD += -I$(Q15ATTN_DIR)
