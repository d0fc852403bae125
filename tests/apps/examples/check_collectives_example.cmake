# Runs the collectives example in one process (3 members) and checks what it printed:
# one line per collective and member, the values computed by hand.
#   cmake -DEXAMPLE=<fanout_collectives_example> -P check_collectives_example.cmake
unset(ENV{RANK})  # the in-process setting, whatever the caller's environment says
execute_process(COMMAND ${EXAMPLE} 3 OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc
                TIMEOUT 30)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the example failed (${rc}): ${err}")
endif()
set(expected
    "3 members in this process (cpu:0,cpu:1,cpu:2), one thread each"
    "[member 1] broadcast from 0:        [0, 0, 0] -> [3.5, -1, 7]"
    "[member 0] all_reduce i32 sum:      [1, -1, 10] -> [6, -6, 60]"
    "[member 1] all_reduce i32 avg:      [2, -2, 20] -> [2, -2, 20]"
    "[member 2] all_reduce i32 max:      [3, -3, 30] -> [3, -1, 30]"
    "[member 0] all_reduce i32 min:      [1, -1, 10] -> [1, -3, 10]"
    "[member 2] all_reduce bf16 sum:     [0.300781, 260] -> [0.601562, 776]"
    "[member 0] reduce sum to 2:         [1, 1] -> [1, 1]"
    "[member 2] reduce sum to 2:         [3, 9] -> [6, 14]"
    "[member 1] all_gather (uneven):     [2, 2] -> [1, 2, 2, 3, 3, 3]"
    "[member 0] gather to 0:             -> [1, -1, 2, -2, 3, -3]"
    "[member 2] scatter from 0:          -> [40, 50]"
    "[member 1] reduce_scatter sum:      [0, 2, 4, 6, 8, 10] -> [12, 18]"
    "[member 2] all_to_all:              [20, 21, 22] -> [2, 12, 22]"
    "[member 1] broadcast_object from 0: \"lr=3e-4 steps=1000\""
    "[member 2] barrier:                 every member arrived")
foreach(line IN LISTS expected)
  string(FIND "${out}" "${line}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "missing from the example's output: ${line}\n--- output:\n${out}")
  endif()
endforeach()
string(REGEX MATCHALL "\n\\[member [0-2]\\]" rows "\n${out}")
list(LENGTH rows n)
if(NOT n EQUAL 42)  # 14 calls x 3 members
  message(FATAL_ERROR "expected 42 member lines, got ${n}:\n${out}")
endif()
