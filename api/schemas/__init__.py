"""Request and response bodies: Base / Create / Update / Public / ListPublic per entity."""
