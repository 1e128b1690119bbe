"""Alembic's environment for the store: migrations run on the connection the store hands
over (``config.attributes["connection"]``), never on a URL of their own."""

from alembic import context

from harness.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata,
                  render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
