"""DescribeLaunchTemplateVersions pages like EC2 (moto cut the answer at MaxResults and sent no
NextToken): the launch template data of every template of the Region (`$Latest` and/or
`$Default`, no template named) comes in pages of MaxResults (1..200) with a NextToken, the way
the rotator reads the templates of many groups at once. A named template's versions are
paged the same way; an answer that fits in one page is moto's, unchanged. DescribeLaunchTemplates
by `LaunchTemplateIds` / `LaunchTemplateNames` answers every template named, as EC2 does (moto
cut the answer at its default MaxResults of 15; EC2 refuses MaxResults together with ids)."""

from moto.core.responses import ActionResult
from moto.ec2.exceptions import InvalidParameterValue

_TOKEN = "lt-page-"


def apply_patches() -> None:
    from moto.ec2.responses.launch_templates import LaunchTemplates

    def describe_launch_template_versions(self) -> ActionResult:
        name = self._get_param("LaunchTemplateName")
        template_id = self._get_param("LaunchTemplateId")
        requested = self._get_param("MaxResults")
        max_results = int(requested) if requested is not None else None
        if max_results is not None and not 1 <= max_results <= 200:
            raise InvalidParameterValue(
                f"Value ( {max_results} ) for parameter maxResults is invalid. Parameter must be between 1 and 200."
            )
        token = self._get_param("NextToken")
        start = 0
        if token:
            if not str(token).startswith(_TOKEN) or not token[len(_TOKEN):].isdigit():
                raise InvalidParameterValue(f"The value ({token}) for parameter nextToken is invalid.")
            start = int(token[len(_TOKEN):])
        self.error_on_dryrun()
        found = self.ec2_backend.describe_launch_template_versions(
            template_name=name,
            template_id=template_id,
            versions=self._get_param("Versions", []),
            min_version=self._get_int_param("MinVersion"),
            max_version=self._get_int_param("MaxVersion"),
            # All of them: the page is cut below (moto cut here, without a token).
            max_results=None,
        )
        page = found[start:] if max_results is None else found[start : start + max_results]
        result = {
            "LaunchTemplateVersions": [
                {
                    "CreateTime": version.create_time,
                    "CreatedBy": f"arn:{self.partition}:iam::{self.current_account}:root",
                    "DefaultVersion": template.is_default(version),
                    "LaunchTemplateData": version.data,
                    "LaunchTemplateId": template.id,
                    "LaunchTemplateName": template.name,
                    "VersionDescription": version.description,
                    "VersionNumber": version.number,
                }
                for template, version in page
            ]
        }
        if max_results is not None and start + max_results < len(found):
            result["NextToken"] = f"{_TOKEN}{start + max_results}"
        return ActionResult(result)

    LaunchTemplates.describe_launch_template_versions = describe_launch_template_versions

    original = LaunchTemplates.describe_launch_templates

    def describe_launch_templates(self) -> ActionResult:
        names = self._get_param("LaunchTemplateNames", []) or []
        ids = self._get_param("LaunchTemplateIds", []) or []
        if not names and not ids:
            return original(self)
        if self._get_param("MaxResults") is not None:
            from moto.ec2.exceptions import InvalidParameterCombination

            raise InvalidParameterCombination(
                "The parameter launchTemplateIds cannot be used with the parameter maxResults"
            )
        self.error_on_dryrun()
        templates = self.ec2_backend.describe_launch_templates(
            template_names=names, template_ids=ids, filters=self._filters_from_querystring()
        )
        result = {
            "LaunchTemplates": [
                {
                    "CreateTime": t.create_time,
                    "CreatedBy": f"arn:{self.partition}:iam::{self.current_account}:root",
                    "DefaultVersionNumber": t.default_version_number,
                    "LatestVersionNumber": t.latest_version_number,
                    "LaunchTemplateId": t.id,
                    "LaunchTemplateName": t.name,
                    "Tags": t.tags,
                }
                for t in templates
            ]
        }
        return ActionResult(result)

    LaunchTemplates.describe_launch_templates = describe_launch_templates
