"""The AWS provider: Auto Scaling groups, EC2 instances, classic and v2 load balancers.

Registered as `aws` in the `nodeops.providers` entry-point group; configured by `AwsConfig`.
"""

from nodeops.providers.aws.config import AwsConfig
from nodeops.providers.aws.provider import AwsProvider

__all__ = ["AwsConfig", "AwsProvider"]
