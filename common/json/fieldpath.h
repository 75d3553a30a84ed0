/*
 * fieldpath: how a validation error names the place in a request body that it refuses (the
 * "field" of the error envelope, ARCHITECTURE.md §11). A path is read from the body's root:
 *
 *   - a member whose key is an identifier ([A-Za-z_][A-Za-z0-9_]*) is ".key", without the
 *     dot at the root: content, response_format.json_schema.name;
 *   - a member with any other key (empty, all digits, or holding '/', '~', '.', '[', '"',
 *     a space, a non-ASCII letter...) is ["key"], the key written as a JSON string literal:
 *     metadata["a/b"], ["x~y"], ["0"];
 *   - an array element is [i]: content[0].text.
 *
 * So a path is readable (no JSON-pointer "~0"/"~1" escapes are left in it) and unambiguous:
 * ["a.b"] is one member, a.b two; ["0"] is an object member, [0] an array element.
 */
#ifndef CHATFLEET_FIELDPATH_H
#define CHATFLEET_FIELDPATH_H

#include <stddef.h>

/* The path of member key of the value at parent ("" for the body itself): a new string the
 * caller frees. key must be NUL-terminated; bytes that are not UTF-8 are written as they are
 * (the error envelope drops them). */
char *fieldpath_member(const char *parent, const char *key);

/* The path of element index of the array at parent: a new string the caller frees. */
char *fieldpath_element(const char *parent, size_t index);

#endif
