"""Sign up, log in, log out (Django auth) and API tokens (shown once, stored hashed)."""

from __future__ import annotations

from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.views import LoginView, LogoutView
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from webapp.jobs.models import ApiToken


@require_http_methods(["GET", "POST"])
def signup(request):
    form = UserCreationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        return redirect("jobs:home")
    return render(request, "registration/signup.html", {"form": form}, status=400 if form.errors else 200)


class Login(LoginView):
    template_name = "registration/login.html"
    redirect_authenticated_user = True
    next_page = "jobs:home"


class Logout(LogoutView):
    next_page = "jobs:home"


@login_required
@require_http_methods(["GET", "POST"])
def tokens(request):
    new_key = ""
    if request.method == "POST":
        _, new_key = ApiToken.issue(request.user, request.POST.get("name", "")[:100])
    return render(
        request, "jobs/tokens.html", {"tokens": request.user.api_tokens.order_by("-created_at"), "new_key": new_key}
    )


@login_required
@require_POST
def token_delete(request, token_id: int):
    request.user.api_tokens.filter(pk=token_id).delete()
    return redirect("jobs:tokens")
