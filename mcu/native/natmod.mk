# The q15attn dynamic native module, built MicroPython's way: set MPY_DIR, MOD, SRC and ARCH, then include
# py/dynruntime.mk. Run through the Makefile's mpy target (make -C mcu/native mpy MPY_DIR=...), which checks MPY_DIR
# and passes a Python that has pyelftools; ARCH=x64 builds a module for the unix port, to test the binding.

MOD = q15attn
SRC = modq15attn.c attention_q15.c attention_q15_divide.c attention_q15_stream.c attention_q15_describe.c \
    kbench_frame.c
ARCH ?= armv7emsp

# dynruntime.mk would leave $(MOD).mpy beside the sources; keep objects and the module under build/$(ARCH)/.
BUILD = build/$(ARCH)/obj
MODULE = build/$(ARCH)/$(MOD).mpy

.DEFAULT_GOAL := $(MODULE)

include $(MPY_DIR)/py/dynruntime.mk

$(SRC_O): attention_q15.h attention_q15_core.h attention_q15_pair.h kbench_frame.h natmod.mk

# MicroPython 1.27 names dynruntime.mk's linked module $(BUILD)/$(MOD).native.mpy; earlier releases $(BUILD)/$(MOD).mpy.
NATIVE_MPY = $(if $(findstring .native.mpy,$(file < $(MPY_DIR)/py/dynruntime.mk)),$(BUILD)/$(MOD).native.mpy,$(BUILD)/$(MOD).mpy)

$(MODULE): $(NATIVE_MPY) $(SRC_MPY)
	$(ECHO) "GEN $@"
	$(Q)$(MPY_TOOL) --merge -o $@ $^
