"""Following a running job: detached watchers, lost and regained contact, webhooks, the cost meter, log search."""
