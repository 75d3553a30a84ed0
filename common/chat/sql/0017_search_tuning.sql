-- Search statistics (issue 38; tests/bench/search/run). A word that is not among a tsvector
-- column's most common lexemes is estimated at half the least common one's frequency. With
-- the default target (100: 1,000 lexemes kept) that floor was 0.16% of chat_messages, about
-- 1,600 of a million rows, for every rare word and every word never written: the list's search
-- then started from the owner's chats and rechecked all their messages (9-10 ms for a user
-- with 1,000 messages) instead of starting from the few rows the GIN index holds for the word
-- (about 2 ms). A target of 1,000 keeps 10,000 lexemes and lowers the floor eightfold (0.02%,
-- 200 rows). It takes effect at the next ANALYZE (autovacuum's or an operator's), which then
-- samples 300,000 rows instead of 30,000 (15 s on the bench's million messages).
ALTER TABLE chat_messages ALTER COLUMN search SET STATISTICS 1000;
ALTER TABLE chats ALTER COLUMN title_search SET STATISTICS 1000;
