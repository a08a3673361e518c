from frost.models.resnet import *  # noqa: F401,F403
from frost.models.resnet import MODELS
