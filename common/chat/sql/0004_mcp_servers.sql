-- The MCP servers a chat enabled at creation (issue 18, ARCHITECTURE.md §7.9): a JSON array of
-- server names from the deployment's configuration; NULL is none.
ALTER TABLE chats ADD COLUMN mcp_servers jsonb;
