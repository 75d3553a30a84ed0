/* libFuzzer target for proto/wire decoding: any input is either decoded or rejected with an
 * error; never a crash, a leak or an unbounded allocation. A decoded message must encode
 * again and decode to the same type (what one side accepts, the other can send). */
#include <stdint.h>
#include <stdlib.h>

#include "mem.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    wire_msg_t msg;
    char why[128];
    if (wire_decode(data, size, &msg, why, sizeof why) != 0) {
        return 0;
    }
    char *out = NULL;
    size_t len = 0;
    ASSERT(wire_encode(&msg, &out, &len) == 0);
    wire_msg_t again;
    ASSERT(wire_decode(out, len, &again, why, sizeof why) == 0);
    ASSERT(again.type == msg.type);
    wire_msg_clear(&again);
    wire_msg_clear(&msg);
    free(out);
    return 0;
}
