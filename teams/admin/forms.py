"""The admin's forms that check more than the model does."""

import json
import re

from django import forms
from django.contrib.admin.helpers import ActionForm
from django.core.exceptions import ValidationError

from teams import services
from teams.conversation import approvals
from teams.errors import InvalidInput, LoomError
from teams.integrations import consultations, mcp_servers, model_endpoints
from teams.models import (
    Agent,
    Anchor,
    ApiToken,
    ConsultantProfile,
    McpServer,
    PMRequest,
    Team,
    Webhook,
    WebhookEvent,
)

# A dollar figure as a person types it: ASCII digits, an optional decimal point. No
# sign, no exponent, no other script's digits ("١٥٠" is refused, not read as 150).
DOLLARS = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.ASCII)


class BudgetField(forms.DecimalField):
    """A cost budget in dollars: DOLLARS, above 0 (or at least 0 with allow_zero).
    Django's DecimalField alone takes "-5" and any script's digits."""

    def __init__(self, *args, allow_zero: bool = False, **kwargs):
        kwargs.pop("min_value", None)
        super().__init__(*args, **kwargs)
        self.allow_zero = allow_zero

    def to_python(self, value):
        if value in self.empty_values:
            return None
        text = str(value).strip()
        if not DOLLARS.fullmatch(text):
            raise ValidationError(
                "Write the budget in dollars with the digits 0-9 and at most one decimal "
                "point, e.g. 7.50.",
                code="invalid",
            )
        return super().to_python(text)

    def validate(self, value):
        super().validate(value)
        if value is not None and (value < 0 or (value == 0 and not self.allow_zero)):
            least = "at least $0" if self.allow_zero else "above $0"
            raise ValidationError(f"A cost budget must be {least}.", code="min_value")


def budget_formfield(db_field, **kwargs):
    """The admin's form field for a model's max_cost_usd: a BudgetField. A team's may
    be 0 (as the API allows); an agent's is above 0, or empty for none."""
    return db_field.formfield(form_class=BudgetField, allow_zero=db_field.model is Team, **kwargs)


class TeamForm(forms.ModelForm):
    """A taken slug says only that it is not available: the same words whether the
    team that has it is one the user manages or one they cannot see."""

    class Meta:
        model = Team
        fields = ("slug",)  # the admin gives the fields of its fieldsets
        error_messages = {"slug": {"unique": "This slug is not available: choose another."}}


# What each answer does, said on the admin's PM request page (teams.conversation.pm_requests,
# teams.run.budgets, teams.conversation.approvals do it).
ANSWER_EFFECTS = {
    PMRequest.Kind.QUESTION: "Your answer joins the conversation and the team resumes.",
    PMRequest.Kind.BUDGET: "“Raise by 50%” or “Double” raises the budget and the team "
    "resumes; “Stop” keeps the budget and leaves the team paused (to go on, raise the "
    "budget in the team's settings, then resume it). Or write a new budget: dollars, or turns "
    "for the turn budget.",
    PMRequest.Kind.APPROVAL: "Approve or Always approve (this tool, from now on): the call "
    "runs and the turn resumes. Deny: the agent reads that it was denied, with your "
    "note, and its turn resumes.",
    PMRequest.Kind.STUCK: "“Close the phase”: the phase ends with your summary and the team "
    "goes on (a last phase ends the run); “Let them go on”: the team resumes; “Pause”: the "
    "team is paused.",
}


def model_id_cleaned(form: forms.ModelForm) -> str:
    """An agent's model id, checked when it changes: its endpoint exists, its key is
    set, it has a price (empty: the default model)."""
    model = (form.cleaned_data.get("model") or "").strip()
    if model and "model" in form.changed_data:
        problem = model_endpoints.model_id_problem(model)
        if problem:
            raise ValidationError(f"This model cannot be used: {problem}")
    return model


class TeamActionForm(ActionForm):
    """The team list's action bar, with the model id "Set every agent's model" gives."""

    model = forms.CharField(
        required=False,
        max_length=100,
        label="Model",
        widget=forms.TextInput(attrs={"placeholder": "e.g. ollama/qwen3:8b"}),
        help_text="Empty: the default model.",
    )


class AgentInlineForm(forms.ModelForm):
    class Meta:
        model = Agent
        fields = ("name",)

    clean_model = model_id_cleaned


class AgentForm(forms.ModelForm):
    """An agent's settings, and the PM's steering of it (teams.run.steering): each filled
    steering field calls its service when the form is saved."""

    speak_next = forms.BooleanField(
        required=False, help_text="This agent speaks next, once; the rotation resumes after."
    )
    nudge = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="A private note this agent reads on its next turn only; no other agent sees it.",
    )
    take_seat = forms.CharField(
        label="Take its seat",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Write this agent's turn yourself: it joins the conversation as the agent's, "
        "marked as written by the PM; the rotation goes on.",
    )

    STEER_FIELDS = ("speak_next", "nudge", "take_seat")

    clean_model = model_id_cleaned

    class Meta:
        model = Agent
        fields = ("name",)  # the admin gives the fields of its fieldsets

    @property
    def changed_data(self):
        """The agent's own fields changed; steering is no setting of the row."""
        return [f for f in super().changed_data if f not in self.STEER_FIELDS]


class PMRequestAnswerForm(forms.ModelForm):
    """Answering goes through the service, which does what ANSWER_EFFECTS says (a
    budget's "Stop" leaves the team paused); a request answered meanwhile is a form
    error, not a second answer."""

    pin_as = forms.CharField(
        label="Pin as anchor",
        required=False,
        max_length=Anchor._meta.get_field("key").max_length,
        help_text="A key (e.g. output_format): the answer becomes that anchor, in every "
        "later prompt of the team.",
    )

    note = forms.CharField(
        label="Note for the agent",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Approval requests: the agent reads it with the call's outcome.",
    )
    edited_arguments = forms.CharField(
        label="Arguments",
        required=False,
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false"}),
        help_text="Approval requests: edit them to approve the call with other arguments "
        "(checked against the tool's schema).",
    )

    class Meta:
        model = PMRequest
        fields = ("answer",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk and "edited_arguments" in self.fields:
            self.fields["edited_arguments"].initial = self.instance.arguments_json
        if "answer" in self.fields:
            self.fields["answer"].help_text = ANSWER_EFFECTS.get(self.instance.kind, "")

    def clean(self):
        cleaned = super().clean()
        if self.instance.pk and self.instance.status != PMRequest.Status.OPEN:
            raise forms.ValidationError(f"This PM request was already {self.instance.status}.")
        answer = (cleaned.get("answer") or "").strip()
        if self.instance.kind == PMRequest.Kind.APPROVAL:
            self._clean_approval(cleaned, answer)
        elif not answer:
            self.add_error("answer", "Write the answer the team should get.")
        elif cleaned.get("pin_as"):
            try:
                services.anchor_check(key=cleaned["pin_as"].strip(), value=answer)
            except LoomError as exc:
                self.add_error("pin_as", exc.message)
        return cleaned

    def _clean_approval(self, cleaned, answer: str) -> None:
        """The service's own check, its refusals as field errors; `arguments` is None
        when the box was left as it was."""
        text = (cleaned.get("edited_arguments") or "").strip()
        arguments = None
        if text:
            try:
                arguments = json.loads(text)
            except json.JSONDecodeError as exc:
                self.add_error("edited_arguments", f"Not JSON: {exc.msg}.")
                return
            if arguments == self.instance.arguments:
                arguments = None
        cleaned["arguments"] = arguments
        try:
            approvals.approval_check(
                self.instance,
                answer=answer,
                note=cleaned.get("note") or "",
                arguments=arguments,
                pin_as=cleaned.get("pin_as") or "",
            )
        except InvalidInput as exc:
            field = {"arguments": "edited_arguments"}.get(exc.field, exc.field)
            self.add_error(field if field in self.fields else None, exc.message)


class ApiTokenForm(forms.ModelForm):
    expires_in = forms.CharField(
        label="Expires in",
        required=False,
        max_length=20,
        help_text="Empty: never. Else how long from now: 30m, 12h, 90d (minutes, hours, "
        "days; at most 3650d). Past it, every use is refused (401).",
    )

    class Meta:
        model = ApiToken
        fields = ("team", "agent", "name", "read_only")

    def clean_expires_in(self):
        value = (self.cleaned_data.get("expires_in") or "").strip()
        if value:
            try:
                services.token_lifetime(value)
            except LoomError as exc:
                raise forms.ValidationError(exc.message) from None
        return value

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


class ConsultantProfileForm(forms.ModelForm):
    """A consultant's base URL and agent card URL lead to no private address
    (teams.lib.outbound); an A2A consultant has a card URL and no base URL."""

    class Meta:
        model = ConsultantProfile
        fields = (
            "name",
            "provider",
            "model",
            "base_url",
            "a2a_url",
            "key_env",
            "strengths",
            "extra_prompt",
            "enabled",
        )

    def clean_base_url(self):
        url = self.cleaned_data.get("base_url") or ""
        if url:
            try:
                consultations.base_url_check(url)
            except LoomError as exc:
                raise forms.ValidationError(exc.message) from None
        return url

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        profile = ConsultantProfile(
            provider=cleaned.get("provider") or "",
            a2a_url=cleaned.get("a2a_url") or "",
            base_url=cleaned.get("base_url") or "",
        )
        try:
            consultations.a2a_check(profile, ["provider", "a2a_url", "base_url"])
        except LoomError as exc:
            self.add_error(exc.field, exc.message)
        return cleaned


class McpServerForm(forms.ModelForm):
    """Checked by the service's own rules (teams.integrations.mcp_servers), each problem on its
    field. `by_superuser` is set by the admin: others may not add a stdio server, and
    see a stdio server's command and variables read-only."""

    by_superuser = False

    class Meta:
        model = McpServer
        fields = ("team", "name", *mcp_servers.MCP_SETTINGS)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        transport = self.fields.get("transport")
        if transport is not None and not self.by_superuser:
            transport.choices = [(McpServer.Transport.HTTP, McpServer.Transport.HTTP.label)]
            transport.help_text = "A stdio server runs a command on the Loom host: superusers only."

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        before = McpServer.objects.filter(pk=self.instance.pk).first() if self.instance.pk else None
        candidate = McpServer.objects.get(pk=before.pk) if before else McpServer()
        for field, value in data.items():
            setattr(candidate, field, value)
        if candidate.team_id is None:
            return data
        try:
            mcp_servers.mcp_server_check(
                server=candidate, before=before, by_superuser=self.by_superuser
            )
        except LoomError as exc:
            field = exc.field if exc.field in self.fields else None
            self.add_error(field, exc.message)
        return data
