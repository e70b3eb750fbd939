"""The REST control plane: `api.app.create_app(settings, runtime)` builds it."""
