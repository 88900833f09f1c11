/*
 * slot: hash slots (slot.h). The tag table is made on first use: tags of
 * one to four characters of [0-9a-z] in order until every slot has one
 * (three are not enough: 85 slots have no tag of three or fewer; the
 * search takes about a millisecond, once).
 */
#include <string.h>

#include "log.h"
#include "slot.h"

/* CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, as Redis. */
static uint16_t slot_table[256];
static char slot_tags[SLOT_COUNT][SLOT_TAG_MAX];
static int slot_tags_made;

static void
slot_make_table(void)
{
	for (int i = 0; i < 256; i++) {
		uint16_t crc = (uint16_t)(i << 8);

		for (int b = 0; b < 8; b++)
			crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021
						      : crc << 1);
		slot_table[i] = crc;
	}
}

uint16_t
slot_crc16(const char *buf, size_t len)
{
	uint16_t crc = 0;

	if (slot_table[1] == 0)
		slot_make_table();
	for (size_t i = 0; i < len; i++)
		crc = (uint16_t)((crc << 8) ^
		    slot_table[((crc >> 8) ^ (uint8_t)buf[i]) & 0xff]);
	return crc;
}

int
slot_of_key(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len), *close;

	if (open != NULL) {
		size_t rest = len - (size_t)(open - key) - 1;

		close = memchr(open + 1, '}', rest);
		if (close != NULL && close > open + 1)
			return slot_crc16(
				   open + 1, (size_t)(close - open - 1)) &
			    (SLOT_COUNT - 1);
	}
	return slot_crc16(key, len) & (SLOT_COUNT - 1);
}

/* Each tag of n characters in order; the first that lands in a slot
 * without one is that slot's. */
static void
slot_make_tags(void)
{
	static const char abc[] = "0123456789abcdefghijklmnopqrstuvwxyz";
	int left = SLOT_COUNT, base = (int)sizeof abc - 1;

	for (int n = 1; n < SLOT_TAG_MAX && left > 0; n++) {
		int total = 1;

		for (int i = 0; i < n; i++)
			total *= base;
		for (int v = 0; v < total && left > 0; v++) {
			char tag[SLOT_TAG_MAX] = { 0 };
			int s;

			for (int i = 0, x = v; i < n; i++, x /= base)
				tag[n - 1 - i] = abc[x % base];
			s = slot_crc16(tag, (size_t)n) & (SLOT_COUNT - 1);
			if (slot_tags[s][0] == '\0') {
				memcpy(slot_tags[s], tag, SLOT_TAG_MAX);
				left--;
			}
		}
	}
	if (left > 0)
		fatalx("slot: %d slots have no tag", left);
	slot_tags_made = 1;
}

const char *
slot_tag(int slot)
{
	if (!slot_tags_made)
		slot_make_tags();
	return slot_tags[slot & (SLOT_COUNT - 1)];
}
