"""The demo MCP servers (order-service, customer-crm, knowledge-base) that `llamon new` projects bind: README.md."""
