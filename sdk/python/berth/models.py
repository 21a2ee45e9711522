"""The API's types (generated from api/openapi.json into berth._models)."""
from ._models import *  # noqa: F401,F403
from ._models import __all__  # noqa: F401
from ._wire import Model  # noqa: F401
