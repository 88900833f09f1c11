/*
 * slot: Redis Cluster's hash slots. A key's slot is CRC16 (XMODEM) of the
 * key, or of its hash tag (what is between the first "{" and the first
 * "}" after it, when that is not empty), mod 16384: exactly Redis's
 * keyHashSlot. Every key of a lock name shares the name's tag, so a name
 * lives in one slot. slot_tag gives, for each slot, a short tag whose
 * keys hash to it: the slot's own keys (its incarnation marker) without
 * a name. Depends on nothing else.
 */
#ifndef LB_SLOT_H
#define LB_SLOT_H

#include <stddef.h>
#include <stdint.h>

#define SLOT_COUNT 16384
#define SLOT_TAG_MAX 5 /* a tag's bytes and the NUL */

uint16_t slot_crc16(const char *buf, size_t len);
/* The slot of a key of len bytes. */
int slot_of_key(const char *key, size_t len);
/* A tag whose keys hash to slot: at most four of [0-9a-z]. */
const char *slot_tag(int slot);

#endif
