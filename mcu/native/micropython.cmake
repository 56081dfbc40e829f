# q15attn as a user C module baked into MicroPython firmware (the alternative to q15attn.mpy), for the CMake ports
# (rp2, esp32):
#   make -C ports/rp2 USER_C_MODULES=/path/to/kbench/mcu/native/micropython.cmake

add_library(usermod_q15attn INTERFACE)

target_sources(usermod_q15attn INTERFACE
    ${CMAKE_CURRENT_LIST_DIR}/modq15attn.c
    ${CMAKE_CURRENT_LIST_DIR}/attention_q15.c
    ${CMAKE_CURRENT_LIST_DIR}/attention_q15_divide.c
    ${CMAKE_CURRENT_LIST_DIR}/attention_q15_stream.c
    ${CMAKE_CURRENT_LIST_DIR}/attention_q15_describe.c
    ${CMAKE_CURRENT_LIST_DIR}/kbench_frame.c
)

target_include_directories(usermod_q15attn INTERFACE
    ${CMAKE_CURRENT_LIST_DIR}
)

target_link_libraries(usermod INTERFACE usermod_q15attn)
