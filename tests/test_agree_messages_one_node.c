/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_agree_messages_one_node: test_agree_messages.c on one node with the node-local path off
 * (no agreement board): agreements by messages, small plans riding them, and blocks of 4 KiB or
 * more that are one run of the input sent as messages of their own after the words.
 */
// lm-test-np: 2 3 4
#define LM_TEST_ONE_NODE 1
#include "test_agree_messages.c"
