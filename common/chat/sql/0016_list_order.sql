-- The chat list's order (issue 38; api-gateway/core/chatlist.c): pinned roots first by
-- pin_order, then the newest update. An index in exactly that order per owner and archive
-- flag lets a page be read in order and stop at its limit, instead of sorting all of an
-- owner's roots; chats_owner_listing (0001) stays for the reads ordered by update alone.
CREATE INDEX chats_owner_list_order
    ON chats (owner_id, archived, (pin_order = 0), pin_order, updated_at DESC, id DESC)
    WHERE parent_chat_id IS NULL;
