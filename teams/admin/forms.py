"""The admin's forms that check more than the model does."""

from django import forms

from teams import services
from teams.errors import LoomError
from teams.models import (
    Anchor,
    ApiToken,
    PMRequest,
    Webhook,
    WebhookEvent,
)


class PMRequestAnswerForm(forms.ModelForm):
    """Answering goes through the service: the answer joins the conversation and the
    team resumes; a request answered meanwhile is a form error, not a second answer."""

    pin_as = forms.CharField(
        label="Pin as anchor",
        required=False,
        max_length=Anchor._meta.get_field("key").max_length,
        help_text="A key (e.g. output_format): the answer becomes that anchor, in every "
        "later prompt of the team.",
    )

    class Meta:
        model = PMRequest
        fields = ("answer",)

    def clean(self):
        cleaned = super().clean()
        if self.instance.pk and self.instance.status != PMRequest.Status.OPEN:
            raise forms.ValidationError(f"This PM request was already {self.instance.status}.")
        answer = (cleaned.get("answer") or "").strip()
        if not answer:
            self.add_error("answer", "Write the answer the team should get.")
        elif cleaned.get("pin_as"):
            try:
                services.anchor_check(key=cleaned["pin_as"].strip(), value=answer)
            except LoomError as exc:
                self.add_error("pin_as", exc.message)
        return cleaned


class ApiTokenForm(forms.ModelForm):
    class Meta:
        model = ApiToken
        fields = ("team", "agent", "name")

    def clean(self):
        data = super().clean()
        team, agent = data.get("team"), data.get("agent")
        if not self.instance.pk and team is None:
            self.add_error(
                "team",
                "A token made here is for a team (account tokens: "
                "manage.py create_api_token --user NAME).",
            )
        if agent is not None and team is not None and agent.team_id != team.id:
            self.add_error("agent", f"Agent {agent.name} is not in team {team.slug}.")
        return data


class WebhookForm(forms.ModelForm):
    events = forms.MultipleChoiceField(
        choices=WebhookEvent.choices,
        widget=forms.CheckboxSelectMultiple,
        help_text="POSTed to the URL when they happen, signed with the webhook's secret.",
    )

    class Meta:
        model = Webhook
        fields = ("team", "url", "events", "enabled")
