-- The search bench's stand-in for the list's statement (tests/bench/search/run), used only when
-- the gateway under test does not search (q ignored): $1 the owner, $2 q, $3 the limit. The
-- gateway's own statement (api-gateway/core/chatlist.c) is read from PostgreSQL's log instead
-- whenever it searches.
SELECT jsonb_build_object('id', c.id, 'title', c.title, 'updated_at', c.updated_at,
                          'pin_order', c.pin_order)
FROM chats c
WHERE c.owner_id = $1 AND c.parent_chat_id IS NULL AND c.archived = false
  AND (c.title_search @@ websearch_to_tsquery('english', $2)
       OR EXISTS (SELECT 1 FROM chat_messages m
                  WHERE m.chat_id = c.id AND NOT m.deleted
                    AND m.search @@ websearch_to_tsquery('english', $2)))
ORDER BY c.pin_order = 0, c.pin_order, c.updated_at DESC, c.id DESC
LIMIT $3
