"""The claim this skill opens with: the releases it holds for (the engine's shared check)."""

from runner.claims.kit import check_release, claim

claim("moe-release")(check_release)
